package kvroutev1

import "errors"

var (
	errEmptyID = errors.New("kvroutev1: empty id")
	errLongID  = errors.New("kvroutev1: id longer than 128 bytes")
	errBadID   = errors.New("kvroutev1: id may only hold ASCII letters, digits, '-' and '_'")
)
