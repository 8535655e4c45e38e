package queryserver

// GroupRoute exposes the group router's decision to the tests.
var GroupRoute = groupRoute
