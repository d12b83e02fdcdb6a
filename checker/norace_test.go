//go:build !race

package checker

// raceEnabled says the test binary was built with -race, for the report's
// command (reproduce).
const raceEnabled = false
