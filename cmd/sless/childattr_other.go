//go:build !linux

package main

import "syscall"

// childAttr keeps a terminal's Ctrl-C from reaching a child process of
// sless dev: sless dev stops it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
