//go:build !linux

package lab

import "syscall"

// gwSysProcAttr: nothing beyond the defaults outside Linux, which has no
// Pdeathsig; the backends still exit when their stdin (a pipe from the
// lab) ends, and the lab stops every child on its way out.
func gwSysProcAttr() *syscall.SysProcAttr { return nil }
