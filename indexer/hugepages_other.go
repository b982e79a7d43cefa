//go:build !linux

package indexer

import "unsafe"

func adviseHugePages(unsafe.Pointer, int) {}
