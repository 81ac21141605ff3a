#pragma once
// What a Wan DiT is trained and sampled for: the `task` option, parsed once.

#include <string>

namespace wan {

/// t2v: text to video. ti2v: text and image to video (TI2V-5B: the first latent frame is the
/// clean image condition). i2v: image to video (A14B I2V: the condition as extra input channels).
enum class Task { T2V, TI2V, I2V };

/// "t2v" | "ti2v" | "i2v"; throws wanfw::Error naming the choices for anything else.
Task parse_task(const std::string& name);

/// The option's spelling of `task`.
const char* task_name(Task task);

}  // namespace wan
