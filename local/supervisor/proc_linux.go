package supervisor

import "syscall"

const (
	termSignal = syscall.SIGTERM
	killSignal = syscall.SIGKILL
)

// procAttr puts a runtime process in a process group of its own, so that
// a Ctrl-C in the terminal reaches sless dev alone (which drains, then
// stops its children), and has the kernel kill it when sless dev dies.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// signalGroup signals the process group led by pid.
func signalGroup(pid int, sig syscall.Signal) {
	_ = syscall.Kill(-pid, sig)
}
