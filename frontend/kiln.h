// Everything a Kiln user needs: #include <kiln/kiln.h>
#pragma once

#include "frontend/invoke.h"
#include "frontend/nd.h"
#include "frontend/ndarray.h"
#include "frontend/nn/nn.h"
#include "ir/device.h"
#include "ir/dtype.h"
#include "ir/error.h"
#include "ir/shape.h"
#include "runtime/engine.h"
#include "runtime/profiler.h"
#include "runtime/storage.h"
