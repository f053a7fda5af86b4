#!/usr/bin/env node
// The ffleet command. The code is TypeScript run through tsx (no build step).
import { register } from 'tsx/esm/api';

register();
await import('./ffleet.ts');
