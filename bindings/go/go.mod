module github.com/libwool/libwool/bindings/go

go 1.24
