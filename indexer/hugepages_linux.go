//go:build linux

package indexer

import (
	"runtime"
	"syscall"
	"unsafe"
)

// hugePageMinBytes is the smallest table worth asking huge pages for.
const hugePageMinBytes = 4 << 20

// adviseHugePages asks the kernel to back the 2 MiB-aligned part of the n bytes at p (a
// large slot table or arena run) with transparent huge pages (when THP is in "madvise"
// mode): both are read at random, and 4 KiB pages would make most reads a TLB miss.
// Failure only costs speed.
func adviseHugePages(p unsafe.Pointer, n int) {
	if n < hugePageMinBytes {
		return
	}
	const huge = 2 << 20
	start := uintptr(p)
	lo := (start + huge - 1) &^ (huge - 1)
	hi := (start + uintptr(n)) &^ (huge - 1)
	if hi <= lo {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, 14 /* MADV_HUGEPAGE */)
	runtime.KeepAlive(p)
}
