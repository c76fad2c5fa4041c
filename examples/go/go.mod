module github.com/libwool/wool-go

go 1.24
