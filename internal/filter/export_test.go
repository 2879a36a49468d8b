package filter

// Scanned is how many bytes of in's payload the filters evaluated on it
// have scanned: what their time follows.
func Scanned(in *Input) int64 {
	if in.view == nil {
		return 0
	}
	return in.view.s.scanned
}
