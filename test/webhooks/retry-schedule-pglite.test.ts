import { describeRetrySchedule } from './retry-schedule.ts';

describeRetrySchedule('pglite');
