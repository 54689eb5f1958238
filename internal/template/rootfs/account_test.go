package rootfs

import (
	"fmt"
	"testing"
)

func FuzzParseDB(f *testing.F) {
	f.Add("root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n")
	f.Add("# comment\n+nis\nbad\nx:y:-1:z\n")
	f.Fuzz(func(t *testing.T, text string) {
		d := &db{text: text, entries: parseDB(text)}
		id := d.freeID(1000)
		if id < 1000 || d.hasID(id) {
			t.Fatalf("freeID = %d", id)
		}
		d.add(fmt.Sprintf("user:x:%d:%d::/home/user:/bin/sh", id, id))
		if _, ok := d.find("user"); !ok || !d.hasID(id) {
			t.Fatal("added user not found")
		}
	})
}
