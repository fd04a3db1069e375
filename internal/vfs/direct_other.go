//go:build !linux

package vfs

import "errors"

func (osFS) OpenDirect(string) (DirectFile, error) { return nil, errors.ErrUnsupported }
