/** Small async primitives for the worker's loops. */

/** A flag that can be awaited: `wait()` resolves true once it is set, false on timeout. */
export class Flag {
  private on = false;
  private waiters: Array<(value: boolean) => void> = [];

  get isSet(): boolean {
    return this.on;
  }

  set(): void {
    this.on = true;
    const waiters = this.waiters;
    this.waiters = [];
    for (const w of waiters) {
      w(true);
    }
  }

  clear(): void {
    this.on = false;
  }

  wait(timeoutMs?: number): Promise<boolean> {
    if (this.on) {
      return Promise.resolve(true);
    }
    return new Promise((resolve) => {
      let timer: NodeJS.Timeout | undefined;
      const waiter = (value: boolean): void => {
        if (timer !== undefined) {
          clearTimeout(timer);
        }
        resolve(value);
      };
      this.waiters.push(waiter);
      if (timeoutMs !== undefined) {
        timer = setTimeout(
          () => {
            const i = this.waiters.indexOf(waiter);
            if (i >= 0) {
              this.waiters.splice(i, 1);
            }
            resolve(false);
          },
          Math.max(0, timeoutMs),
        );
      }
    });
  }
}

/** A counting semaphore. */
export class Semaphore {
  private waiters: Array<() => void> = [];

  constructor(private free: number) {}

  async acquire(): Promise<void> {
    if (this.free > 0) {
      this.free -= 1;
      return;
    }
    await new Promise<void>((resolve) => this.waiters.push(resolve));
  }

  release(): void {
    const next = this.waiters.shift();
    if (next !== undefined) {
      next();
    } else {
      this.free += 1;
    }
  }
}

/** Resolves after `ms`, or at once when `signal` aborts (never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) {
      resolve();
      return;
    }
    const done = (): void => {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, Math.max(0, ms));
    signal?.addEventListener("abort", done, { once: true });
  });
}
