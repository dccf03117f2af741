// Package skipfixture is run by testutil's TestSkipsAreAnnounced with no services: a
// Guarantee test and two others that need them, and one that needs nothing.
package skipfixture

import (
	"testing"

	"github.com/amemory/memory-operator/internal/testutil"
)

func TestGuaranteeFixture(t *testing.T) { testutil.PostgresDSN(t) }

func TestNeedsMinIO(t *testing.T) { testutil.S3Config(t) }

func TestNeedsMilvus(t *testing.T) { testutil.MilvusAddr(t) }

func TestNeedsNothing(t *testing.T) {}
