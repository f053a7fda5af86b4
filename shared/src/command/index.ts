export {
  CHAIN_OPERATOR,
  type CheckCommandResult,
  checkCommand,
  isTranscoderWildcard,
  type ParseCommandResult,
  parseCommand,
  splitChain,
  TRANSCODER_WILDCARDS,
} from './chain.ts';
export { formatCommandLine, quoteArgument } from './quote.ts';
export { type Token, type TokenizeResult, tokenize } from './tokenize.ts';
