package iggytest

import "testing"

// An expiry so far away that now + expiry overflows never comes: the token
// must not wrap around into the past and be expired at creation (issue 27).
func TestTokenExpiryPastTheEndOfTheClockNeverExpires(t *testing.T) {
	tg := embeddedTarget(t)
	raw := tg.rawCreateToken(t, "far-away", ^uint64(0)-1)
	if _, err := tg.connect(t).LoginWithPersonalAccessToken(raw); err != nil {
		t.Fatalf("token with expiry 2^64-2: %v", err)
	}
}
