/// @file
/// cubec — a GPU compute runtime for C programs. The umbrella header.
#ifndef CUBE_CUBE_H_
#define CUBE_CUBE_H_

#include "cube/base.h"
#include "cube/status.h"
#include "cube/log.h"
#include "cube/device.h"
#include "cube/memory.h"
#include "cube/interop.h"
#include "cube/kernel.h"
#include "cube/tensor_map.h"
#include "cube/graph.h"
#include "cube/profile.h"
#include "cube/collective.h"
#include "cube/cache.h"
#include "cube/bundle.h"
#include "cube/tune.h"
#include "cube/world.h"
#include "cube/numeric.h"

#endif  // CUBE_CUBE_H_
