"""SM clock and board power sampled through NVML while a measurement runs.

Under the H200's 700 W limit the SM clock follows the power each kernel draws, so a timing means
little without the clock it ran at: ``ClockSampler().window(fn)`` runs ``fn`` and returns its
result with the median SM clock (MHz) and board power (W) sampled every few ms meanwhile (None
where NVML is missing or gave no sample).
"""
import statistics
import threading
import time


class ClockSampler:
    """SM clock (MHz) and board power (W) from NVML every few ms while active (None where no sample came)."""

    def __init__(self, index=0, period_s=0.005):
        self.samples, self.period, self.on, self.handle = [], period_s, False, None
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            return
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while True:
            if self.on:
                try:
                    mhz = self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
                    watts = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0
                    self.samples.append((mhz, watts))
                except Exception:
                    pass
            time.sleep(self.period)

    def restart(self):
        """Drop the samples of the window so far (its fn calls this once the part to time begins)."""
        self.samples = []

    def window(self, fn):
        self.samples, self.on = [], True
        out = fn()
        self.on = False
        if not self.samples:
            return out, None, None
        return out, statistics.median(s[0] for s in self.samples), statistics.median(s[1] for s in self.samples)
