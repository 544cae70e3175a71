// This file holds the large-table mapping where there is none: tables stay on the Go heap.

//go:build !linux

package index

import "unsafe"

// mapHuge maps nothing here: tables stay on the Go heap.
func mapHuge(int) ([]byte, unsafe.Pointer, bool) { return nil, nil, false }

func unmap([]byte) {}
