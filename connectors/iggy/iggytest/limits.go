package iggytest

// limits bounds what clients can make the broker hold (see WithLimits).
type limits struct{}
