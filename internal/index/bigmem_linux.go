// This file holds the Linux mapping of large tables: mmap aligned to 2 MiB, with MADV_HUGEPAGE.

package index

import (
	"syscall"
	"unsafe"
)

// mapHuge maps size bytes of zeroed memory aligned to 2 MiB and asks for
// huge pages on it. The mapping is 2 MiB larger than asked, to align it;
// the slack is never touched, so it takes no memory.
func mapHuge(size int) (mem []byte, at unsafe.Pointer, ok bool) {
	mem, err := syscall.Mmap(-1, 0, size+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		return nil, nil, false // the heap will do
	}
	off := (hugePage - int(uintptr(unsafe.Pointer(&mem[0]))%hugePage)) % hugePage
	use := mem[off : off+size]
	// Without transparent huge pages (THP "never", or no THP in the kernel)
	// this fails and the table keeps 4-KiB pages: slower, still correct.
	_ = syscall.Madvise(use, syscall.MADV_HUGEPAGE)
	return mem, unsafe.Pointer(&use[0]), true
}

func unmap(mem []byte) { _ = syscall.Munmap(mem) }
