package adapter

// Exported for the tests of package adapter_test.
var (
	EncodeMsgpack = encodeMsgpack
	DecodeMsgpack = decodeMsgpack
	ReplaceElems  = replaceElems
)
