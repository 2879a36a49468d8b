package store_test

import (
	"testing"

	"github.com/hookgate/hookgate/internal/dbtest"
)

func TestMain(m *testing.M) { dbtest.Main(m) }
