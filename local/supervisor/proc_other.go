//go:build !linux

package supervisor

import "syscall"

const (
	termSignal = syscall.SIGTERM
	killSignal = syscall.SIGKILL
)

// procAttr puts a runtime process in a process group of its own. Outside
// Linux nothing kills it when sless dev dies without stopping it.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// signalGroup signals the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}
