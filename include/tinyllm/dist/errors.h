// The spelling from before the folder was renamed to distributed/ (docs/DESIGN.md),
// kept so that code written against it still builds.
#pragma once

#include "tinyllm/distributed/errors.h"
