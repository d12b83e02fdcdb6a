//go:build !unix

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "quickstart: needs a Unix system (it pauses a child process with SIGSTOP)")
	os.Exit(1)
}
