package main

import (
	"context"
	"errors"

	"github.com/fencelock/fencelock/bench/lockbench"
)

func w6(ctx context.Context, f flags, dir string) (lockbench.Result, error) {
	return lockbench.Result{}, errors.New("not yet")
}
