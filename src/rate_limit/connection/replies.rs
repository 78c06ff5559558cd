//! The scripts' plain replies (an integer, a pair of integers) read in one place; anything
//! else is the script answering outside its contract.

use redis::Value;

use super::RedisCallError;

/// `reply` as the integer `script` answers.
pub(crate) fn int(reply: &Value, script: &'static str) -> Result<i64, RedisCallError> {
    match reply {
        Value::Int(n) => Ok(*n),
        other => Err(RedisCallError::unexpected(script, other)),
    }
}

/// `reply` as the `{int, int}` array `script` answers.
pub(crate) fn int_pair(reply: &Value, script: &'static str) -> Result<(i64, i64), RedisCallError> {
    if let Value::Array(items) = reply
        && let [Value::Int(a), Value::Int(b)] = items.as_slice()
    {
        return Ok((*a, *b));
    }
    Err(RedisCallError::unexpected(script, reply))
}
