package watertightgrpc_test

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/watertight-go/watertight"

	watertightgrpc "github.com/watertight-go/watertight/contrib/watertightgrpc"
)

func TestParsePushback(t *testing.T) {
	cases := []struct {
		v     string
		d     time.Duration
		retry bool
	}{
		{"0", 0, true},
		{"250", 250 * time.Millisecond, true},
		{" 7\t", 7 * time.Millisecond, true},
		{"007", 7 * time.Millisecond, true},
		{"9223372036854", 9223372036854 * time.Millisecond, true},
		{"9223372036855", math.MaxInt64, true},
		{strings.Repeat("9", 40), math.MaxInt64, true},
		{"-1", 0, false},
		{"-0", 0, false},
		{"-250", 0, false},
		{"", 0, false},
		{" ", 0, false},
		{"+5", 0, false},
		{"1.5", 0, false},
		{"5ms", 0, false},
		{"1 0", 0, false},
		{"0x10", 0, false},
		{"١٢", 0, false},
		{strings.Repeat("9", 40) + "x", 0, false},
	}
	for _, c := range cases {
		d, ok := watertightgrpc.ParsePushback(c.v)
		if d != c.d || ok != c.retry {
			t.Errorf("ParsePushback(%q) = %v, %v; want %v, %v", c.v, d, ok, c.d, c.retry)
		}
	}
}

func FuzzParsePushback(f *testing.F) {
	for _, s := range []string{
		"0", "1", "250", "-1", "-0", " 250 ", "\t5", "", " ", "+5", "1.5", "1e3", "5ms",
		"9223372036854", "9223372036855", strings.Repeat("9", 30), "0x10", "١٢", "\x00", "1_000",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		d, retry := watertightgrpc.ParsePushback(v)
		if !retry {
			if d != 0 {
				t.Fatalf("ParsePushback(%q) = %v, false; want 0 when not retrying", v, d)
			}
		} else if d < 0 {
			t.Fatalf("ParsePushback(%q) = %v < 0", v, d)
		}
		s := strings.Trim(v, " \t")
		n, err := strconv.ParseInt(s, 10, 64)
		digitsOnly := s != "" && strings.Trim(s, "0123456789") == ""
		switch {
		case !digitsOnly:
			if retry {
				t.Fatalf("ParsePushback(%q) = %v, true; want no retry for a value that is not digits", v, d)
			}
		case err == nil && n <= math.MaxInt64/int64(time.Millisecond):
			if !retry || d != time.Duration(n)*time.Millisecond {
				t.Fatalf("ParsePushback(%q) = %v, %v; want %dms", v, d, retry, n)
			}
		default:
			if !retry || d != math.MaxInt64 {
				t.Fatalf("ParsePushback(%q) = %v, %v; want the largest Duration", v, d, retry)
			}
		}
	})
}

func TestClassifyCode(t *testing.T) {
	type want struct {
		o         watertight.Outcome
		transient bool
	}
	wants := map[codes.Code]want{
		codes.OK:                 {watertight.Success, false},
		codes.Canceled:           {watertight.Ignored, false},
		codes.Unknown:            {watertight.Failure, false},
		codes.InvalidArgument:    {watertight.Ignored, false},
		codes.DeadlineExceeded:   {watertight.Failure, true},
		codes.NotFound:           {watertight.Ignored, false},
		codes.AlreadyExists:      {watertight.Ignored, false},
		codes.PermissionDenied:   {watertight.Ignored, false},
		codes.ResourceExhausted:  {watertight.Failure, false},
		codes.FailedPrecondition: {watertight.Ignored, false},
		codes.Aborted:            {watertight.Ignored, false},
		codes.OutOfRange:         {watertight.Ignored, false},
		codes.Unimplemented:      {watertight.Ignored, false},
		codes.Internal:           {watertight.Failure, false},
		codes.Unavailable:        {watertight.Failure, true},
		codes.DataLoss:           {watertight.Failure, false},
		codes.Unauthenticated:    {watertight.Ignored, false},
		codes.Code(99):           {watertight.Failure, false},
	}
	for c, w := range wants {
		o, tr := watertightgrpc.ClassifyCode(c)
		if o != w.o || tr != w.transient {
			t.Errorf("ClassifyCode(%v) = %v, %v; want %v, %v", c, o, tr, w.o, w.transient)
		}
	}
}
