module github.com/fencelock/fencelock/bench/critpath

go 1.26.0

require (
	github.com/stretchr/testify v1.12.1
	go.uber.org/goleak v1.3.0
	golang.org/x/exp v0.0.0-20261120182113-8801fbdfac81
)

require go.yaml.in/yaml/v3 v3.0.5 // indirect
