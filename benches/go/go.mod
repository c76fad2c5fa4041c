module github.com/libwool/wool-bench

go 1.24

require github.com/libwool/wool-go v0.0.0

replace github.com/libwool/wool-go => ../../examples/go
