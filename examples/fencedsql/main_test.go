package main

import (
	"testing"

	"go.uber.org/goleak"
)

// afterTests run once every test has, before goleak looks.
var afterTests []func()

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		for _, f := range afterTests {
			f()
		}
	}))
}
