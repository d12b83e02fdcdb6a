//go:build race

package main

// raceEnabled: the test binary was built with -race, so the example's
// processes are too, and their build reuses the test's compiled packages.
const raceEnabled = true
