package hostinfo

import "syscall"

// dieWithParent kills a probe when kbundle dies, even by SIGKILL.
func dieWithParent() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
