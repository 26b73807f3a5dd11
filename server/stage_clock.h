// The clock a Run's stages are timed with (RunTiming in the service,
// ExecuteTiming in the GPU executor), and the microseconds between two of
// its readings.
#ifndef KERNTUNE_SERVER_STAGE_CLOCK_H_
#define KERNTUNE_SERVER_STAGE_CLOCK_H_

#include <chrono>

namespace kt::server {

using StageClock = std::chrono::steady_clock;

inline double MicrosSince(StageClock::time_point start, StageClock::time_point end) {
  return std::chrono::duration<double, std::micro>(end - start).count();
}

}  // namespace kt::server

#endif  // KERNTUNE_SERVER_STAGE_CLOCK_H_
