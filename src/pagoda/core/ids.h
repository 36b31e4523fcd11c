// Identifiers shared across layers: the KV cache, the scheduler, the engine and the server all name a
// request by its RequestId (the engine hands them out, from 1, in add_request() order).
#pragma once

#include <cstdint>

namespace pagoda {

using RequestId = uint64_t;

}  // namespace pagoda
