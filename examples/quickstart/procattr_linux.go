//go:build linux

package main

import "syscall"

// childAttr makes the kernel kill client A's process if the quickstart dies,
// so the child never outlives its parent.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
