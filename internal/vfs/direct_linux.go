package vfs

import (
	"os"
	"syscall"
)

func (osFS) OpenDirect(name string) (DirectFile, error) {
	return os.OpenFile(name, os.O_WRONLY|syscall.O_DIRECT|syscall.O_DSYNC, 0)
}
