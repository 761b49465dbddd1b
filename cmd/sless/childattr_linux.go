package main

import "syscall"

// childAttr has the kernel kill a child process of sless dev when sless
// dev dies, and keeps a terminal's Ctrl-C from reaching it: sless dev
// stops it.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
