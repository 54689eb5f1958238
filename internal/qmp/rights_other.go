//go:build !unix

package qmp

func unixRights(int) []byte { return nil }
