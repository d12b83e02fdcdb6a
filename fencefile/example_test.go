//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package fencefile_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/fencelock/fencelock"
	"github.com/fencelock/fencelock/fencefile"
)

// The file is keyed to the group of the first fence it admits; a group
// bootstrapped again from empty Dirs has another ID and low tokens, and is
// refused until the operator re-keys the file.
func ExampleFile_Rekey() {
	dir, err := os.MkdirTemp("", "fencefile-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	f, err := fencefile.Open(filepath.Join(dir, "resource.log"))
	if err != nil {
		panic(err)
	}
	defer f.Close()

	old := fencelock.Fence{Group: 0xfeed, Token: 1 << 40} // lock.Fence() in the old group
	fmt.Println(f.AppendFence(old, []byte("old group")))
	reborn := fencelock.Fence{Group: 0xbeef, Token: 65536}
	err = f.AppendFence(reborn, []byte("new group"))
	fmt.Println(errors.Is(err, fencelock.ErrOtherGroup))

	// Every holder of the old group has stopped: the operator re-keys.
	fmt.Println(f.Rekey(reborn.Group))
	fmt.Println(f.AppendFence(reborn, []byte("new group")))
	fmt.Println(errors.Is(f.AppendFence(old, []byte("old group wakes up")), fencelock.ErrOtherGroup))
	// Output:
	// <nil>
	// true
	// <nil>
	// <nil>
	// true
}
