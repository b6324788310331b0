//go:build linux

package lab

import "syscall"

// gwSysProcAttr: a child of the gateway scenario is killed by the kernel
// when the lab dies, however it dies (SIGKILL included), so that no
// backend or gateway outlives it. (Pdeathsig fires when the thread that
// started the child exits; Go ends a thread only when a goroutine locked
// to it exits without unlocking, which the lab never does.)
func gwSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
