// Package linux_amd64 holds no code: its directory carries the prebuilt static libwool.a for
// linux/amd64 in the released module (scripts/release-go.sh puts it there; a checkout of the
// repository has none). The binding imports it blank so that `go mod vendor` copies the
// archive along with the binding.
package linux_amd64
