package main

import (
	"io/fs"
	"net"
	"path/filepath"
	"time"
)

func dialTCP(addr string) (net.Conn, error) { return net.DialTimeout("tcp", addr, time.Second) }

func filepathWalkSize(dir string, total *int64) error {
	return filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if info, err := d.Info(); err == nil {
			*total += info.Size()
		}
		return nil
	})
}
