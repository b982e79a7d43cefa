//go:build linux

package indexer

import (
	"runtime"
	"syscall"
	"unsafe"
)

// hugePageMinBytes is the smallest table worth asking huge pages for.
const hugePageMinBytes = 8 << 20

// adviseHugePages asks the kernel to back the 2 MiB-aligned part of a large slot table
// with transparent huge pages (when THP is in "madvise" mode): the table is probed at
// random, and 4 KiB pages would make most probes a TLB miss. Failure only costs speed.
func adviseHugePages(s []uint64) {
	n := len(s) * 8
	if n < hugePageMinBytes {
		return
	}
	const huge = 2 << 20
	start := uintptr(unsafe.Pointer(&s[0]))
	lo := (start + huge - 1) &^ (huge - 1)
	hi := (start + uintptr(n)) &^ (huge - 1)
	if hi <= lo {
		return
	}
	_, _, _ = syscall.Syscall(syscall.SYS_MADVISE, lo, hi-lo, 14 /* MADV_HUGEPAGE */)
	runtime.KeepAlive(s)
}
