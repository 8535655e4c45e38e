package queryserver_test

import (
	"encoding/base64"
	"encoding/binary"
	"io"
	"net/http"
	"strings"
	"testing"
)

// Errors say what is wrong without echoing unbounded input: a 100 KB key
// comes back cut, a cursor of another table says what to do (issue 27).
func TestErrorsAreBoundedAndSayWhatToDo(t *testing.T) {
	_, _, _, hs := newShop(t)
	huge := strings.Repeat("k", 100_000)
	resp, err := http.Get(hs.URL + "/tables/totals/" + huge)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 4 || len(body) > 2048 || !strings.Contains(string(body), "error cut") {
		t.Fatalf("GET of a 100 KB key: %d, %d bytes: %.200s", resp.StatusCode, len(body), body)
	}
	cur := base64.RawURLEncoding.EncodeToString(append(binary.BigEndian.AppendUint32(nil, 2175458154), 'x'))
	errorOf(t, hs.URL+"/tables/totals?after="+cur, http.StatusBadRequest, "not a cursor of this table", "start without after")
}
