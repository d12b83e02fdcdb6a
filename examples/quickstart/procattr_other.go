//go:build unix && !linux

package main

import "syscall"

// childAttr: without Pdeathsig, the child exits when its stdin closes.
func childAttr() *syscall.SysProcAttr { return nil }
