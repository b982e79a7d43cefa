//go:build !linux

package indexer

func adviseHugePages([]uint64) {}
