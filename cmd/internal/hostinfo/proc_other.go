//go:build !linux

package hostinfo

import "syscall"

// dieWithParent: only Linux kills a child with its parent.
func dieWithParent() *syscall.SysProcAttr { return nil }
