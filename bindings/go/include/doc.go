// Package include holds no code: its directory carries libwool's C header, wool.h, in the
// released module (scripts/release-go.sh copies the repository's include/wool.h there; a
// checkout of the repository has none). The binding imports it blank so that `go mod vendor`
// copies the header along with the binding.
package include
