#pragma once
// How values from every process combine (Strategy::all_reduce, DistributedSession::all_reduce).

namespace wanfw {

enum class Reduce { Sum, Mean, Max, Min };

}  // namespace wanfw
