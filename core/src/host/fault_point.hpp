#pragma once
// Faults on purpose, for the reliability tests: a process signals itself at a named point of a
// step or of writing a checkpoint, so that a test can kill a rank at exactly the worst moment
// instead of hoping a random one reaches it. Off unless the environment asks:
//
//   WANFW_FAULT="POINT[,rank=R][,step=N][,signal=KILL|TERM|STOP]"
//
// POINT, of step N (1-based): step-forward (before the step's first forward: the other ranks go
// on into its collectives, fsdp's gathers and sequence parallelism's all-to-alls), step-gradients
// (the backward done, before the gradients are averaged: the others wait in that collective),
// step-optimizer (the gradients averaged, before the optimizer step; in one phase of a model in
// phases). Of the checkpoint of step N: checkpoint-pieces (a rank wrote its piece files, before
// the others learn it did), checkpoint-index (the main process wrote the piece indexes, before the
// trainer state), checkpoint-rename (the folder is whole, before it is renamed into place). rank
// and step: only there (default: any); signal: what the process sends itself (default KILL).

#include <cstdint>
#include <string_view>

namespace wanfw {

/// Throws Error when WANFW_FAULT is set and malformed (an unknown point, a setting it does not take).
void check_fault_setting();
/// Signals this process when WANFW_FAULT names `point` (and this rank and step, if it names them).
void fault_point(std::string_view point, int rank, std::int64_t step);

}  // namespace wanfw
