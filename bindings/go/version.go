package wool

// #include "wool.h"
import "C"

// Version returns the version of the libwool this package is linked against, e.g. "0.1.0".
func Version() string {
	return C.GoString(C.wool_version())
}
