module github.com/libwool/libwool/benches/go

go 1.24

require (
	github.com/libwool/libwool/benches/harness v0.0.0
	github.com/libwool/libwool/bindings/go v0.0.0
)

replace (
	github.com/libwool/libwool/benches/harness => ../harness
	github.com/libwool/libwool/bindings/go => ../../bindings/go
)
