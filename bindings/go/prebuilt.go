package wool

// The prebuilt libraries and the header sit in directories with no Go code of their own but a
// marker package; these blank imports make `go mod vendor` copy them with the binding, so a
// vendored build links the same archive as one from the module cache.
import (
	_ "github.com/libwool/libwool/bindings/go/include"
	_ "github.com/libwool/libwool/bindings/go/lib/linux_amd64"
	_ "github.com/libwool/libwool/bindings/go/lib/linux_arm64"
)
