module github.com/libwool/libwool/benches/harness

go 1.24
